//! Support for the integration tests run by `cargo xtask integ`.
