"""Schema formats for the schema registry, without Django: parsing each type into a canonical
text (formats.py), and the compatibility rules between two versions (avroformat.py,
jsonformat.py, protoformat.py). The registry's rows and workflows are replication/models/
schemas.py and replication/services/registry.py."""
