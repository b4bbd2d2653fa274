"""The AMQP 1.0 front door: the same router, queues and confirms as the 0-9-1 door, another protocol."""
