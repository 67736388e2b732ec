"""The schema registry's HTTP interface: Confluent's Schema Registry REST API, per tenant, at
/schemas/registry/ (and /schemas/registry/tenants/<tenant>/ for a user of several tenants),
signed in with HTTP Basic (user name and API token, as the Kafka listener's SASL/PLAIN takes
them). The rules are the domain's (replication/services/registry.py)."""
