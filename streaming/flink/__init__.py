"""PyFlink jobs of the profile pipeline. No Django here: they talk to the rest through Kafka topics."""
