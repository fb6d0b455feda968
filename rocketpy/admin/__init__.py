"""``rocketpy-admin`` (also ``python -m rocketpy.admin``): mqadmin's most used sub-commands over
the RocketMQ 4.x protocol, for rocketpy and Apache RocketMQ 4.x clusters. See ``doc/admin.md``."""
