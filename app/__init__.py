"""txmsg: RocketMQ-style transactional (half) messages on SQL storage."""
