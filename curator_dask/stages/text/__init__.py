"""Text stages."""
