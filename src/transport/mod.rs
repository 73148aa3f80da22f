//! Transports: move protocol lines between a byte stream and a session. They know the
//! line format and the engine's input/output channels, never providers or tools.

pub mod stdio;
