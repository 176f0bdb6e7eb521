"""Pairing of two runs' calls: names, mapping files, automatic alignment (DESIGN.md)."""
