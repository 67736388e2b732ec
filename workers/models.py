"""Records of the worker processes themselves. The bulk Job record lives with the domain that
starts and finishes jobs (replication/models.py); its table is still workers_job."""
