"""Internal helpers."""
