//! transports
