"""Text readers and writers."""
