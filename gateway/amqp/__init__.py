"""The AMQP 0-9-1 front door: connections and channels over ``wire.amqp``, the model in ``routing``."""
