"""Master/slave replication of the commit log (spec store-and-client.md §9; doc/ha.md)."""
