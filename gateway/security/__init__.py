"""Authentication, TLS and authorization shared by the Kafka and AMQP listeners."""
