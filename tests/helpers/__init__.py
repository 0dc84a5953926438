"""Small helpers that several test folders share (test doubles, record builders)."""
