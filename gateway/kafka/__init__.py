"""The Kafka protocol front door: connection handling and one module per group of APIs."""
