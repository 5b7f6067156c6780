//! The generative differential campaign (`scripts/generative-compare.sh`,
//! docs/design/upstream-comparison.md): seeded random scenarios for all
//! five helpers, each a starting state built by the stand-ins' fixtures,
//! one to three damages to its files, and one to three commands with argv
//! variations, run by the original (on the upstream modules) and by the
//! binary on identical copies at the same path.
//!
//! - [`Scenario::generate`] turns `(seed, index)` into a scenario, the same
//!   one on every machine; its [`std::fmt::Display`] is the reproduction.
//! - [`Bench`] builds a scenario's state and runs one side of it, observing
//!   what the upstream comparison observes ([`crate::upstream::Observed`]).
//! - [`Campaign`] compares both sides, re-runs a difference to prove it
//!   deterministic and shrinks it to a minimal reproduction.
//! - [`Facts`] keeps what the originals did, per scenario, so the normal
//!   suite replays the scenarios against the binaries alone.

mod campaign;
mod damage;
mod facts;
mod invocation;
mod random;
mod run;
mod scenario;
mod state;

pub use campaign::{judge, Verdict};
pub use campaign::{Campaign, Difference, GenerativeDeviation, Tally, GENERATIVE_DEVIATIONS};
pub use damage::{Damage, DamageKind};
pub use facts::{Facts, RecordedScenario, FACTS_FILE};
pub use invocation::{Invocation, Variation};
pub use run::{Bench, Reference, SideRun, WRONG_CLASS_ENV};
pub use scenario::{Program, Scenario, Start};
