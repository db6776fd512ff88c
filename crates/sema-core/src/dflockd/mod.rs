//! dflockd lock-server client.
