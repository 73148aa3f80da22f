//! Transports.
