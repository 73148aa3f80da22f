//! Builds engine sessions from a profile.
