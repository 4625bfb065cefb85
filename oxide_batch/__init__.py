"""oxide_batch: the durable job repository and operator console of a batch framework."""
