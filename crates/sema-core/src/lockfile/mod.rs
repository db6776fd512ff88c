//! File-Based Semaphore lock files.
