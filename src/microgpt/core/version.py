"""This microgpt's version, written into every checkpoint's config.json and shown by `microgpt --version`."""

__version__ = "0.1.0"
