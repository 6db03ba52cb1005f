//! The egress filter's decisions (A.3, A.4, E3), as pure functions: judging a destination against
//! the allow-list, the agreement of CONNECT target, SNI and Host, the DNS-rebinding guard,
//! phantoms, the streaming phantom/value substitution and leak detection, and the proxy's
//! configuration and live settings files. The proxy runtime (handler-core's `egress`) only does
//! I/O around these.

pub mod authority;
pub mod config;
pub mod control;
pub mod hello;
pub mod inject;
pub mod judge;
pub mod phantom;
pub mod pool;
pub mod rebind;
pub mod replace;
pub mod topology;
pub mod wsframe;

pub use authority::{Authority, AuthorityError, Mismatch};
pub use config::{ProxyConfig, ProxyMode, Settings, SettingsError};
pub use inject::{Hits, InjectionSet, Rules};
pub use judge::{Verdict, judge};
pub use phantom::{NotInjectable, RandomSource, injectable, make_phantom};
pub use replace::Replacer;
