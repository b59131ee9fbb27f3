"""Domain rules: message validation, the transaction state machine, the lifecycle."""
