"""RocketMQ 4.x "plain" ACL: request signing (client) and the broker's access check (doc/security.md)."""
