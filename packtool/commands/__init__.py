"""One module per CLI command; each is a thin typer function that calls packtool.api."""
