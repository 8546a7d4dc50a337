//! sans-IO RFC 7143 core
