"""Readers for msprobe dump directories: metadata, layout and tensor files."""
