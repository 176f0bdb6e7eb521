"""Reports: JSON document, CSV tables, HTML page, plots."""
