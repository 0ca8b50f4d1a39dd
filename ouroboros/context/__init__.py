"""Context policies: pure functions from a message list to a message list (plus the view cache)."""
