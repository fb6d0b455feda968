"""Master/slave replication of the commit log (doc/ha.md; doc/wire.md §12)."""
