"""The machine and the file system: atomic files, logging, the data directory,
provenance, the memory allocator, device and precision, worker processes.

Nothing here knows about models or text; every stage builds on it.
"""
