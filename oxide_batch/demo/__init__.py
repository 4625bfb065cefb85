"""Demo data: realistic workloads driven through the repository."""
