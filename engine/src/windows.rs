//! Windows processor groups (KEP-4885).
