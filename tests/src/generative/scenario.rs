//! What a generated scenario is: a helper, a starting state, damages and
//! commands, all plain data, so a scenario prints as its own reproduction
//! and shrinks by dropping parts.

use std::fmt;

use sha2::{Digest, Sha256};

use super::damage::{self, Damage};
use super::invocation::{self, Invocation};
use super::random::Random;
use crate::upstream::Helper;

/// The helper a scenario drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// `execution_manage.py` / `execution-manage`.
    Manage,
    /// `execution_activation.py` / `execution-activation`.
    Activation,
    /// `update_handoff.py` (through the comparison's driver) / `update-handoff`.
    Handoff,
    /// `uninstall.sh` / `uninstall`.
    Uninstall,
    /// `update_runner.py` / `update-runner`.
    Runner,
}

impl Program {
    /// Every program, in the order the campaign cycles through them.
    pub const ALL: [Program; 5] = [
        Program::Manage,
        Program::Activation,
        Program::Handoff,
        Program::Uninstall,
        Program::Runner,
    ];

    /// The name reports use (the binary's).
    pub fn name(self) -> &'static str {
        match self {
            Program::Manage => "execution-manage",
            Program::Activation => "execution-activation",
            Program::Handoff => "update-handoff",
            Program::Uninstall => "uninstall",
            Program::Runner => "update-runner",
        }
    }

    /// The comparison's helper.
    pub fn helper(self) -> Helper {
        match self {
            Program::Manage => Helper::ExecutionManage,
            Program::Activation => Helper::ExecutionActivation,
            Program::Handoff => Helper::UpdateHandoff,
            Program::Uninstall => Helper::Uninstall,
            Program::Runner => Helper::UpdateRunner,
        }
    }

    /// The starting states this program's scenarios begin from.
    fn starts(self) -> Vec<Start> {
        let journals = JOURNAL_PHASES.iter().map(|phase| Start::Journal(phase));
        match self {
            Program::Manage | Program::Activation => [Start::Split, Start::Split, Start::Legacy]
                .into_iter()
                .chain(journals)
                .collect(),
            Program::Handoff => vec![Start::Split, Start::Split, Start::Journal("prepared")],
            Program::Uninstall => vec![Start::Split, Start::Legacy, Start::Legacy, Start::Bare],
            Program::Runner => vec![Start::Split, Start::Legacy],
        }
    }
}

/// The phases a generated activation journal stands in (semantic damage:
/// a valid journal at another point of its life).
pub(super) const JOURNAL_PHASES: [&str; 8] = [
    "prepared",
    "quiescing",
    "quiesced",
    "linking",
    "linked",
    "committed",
    "rolling-back",
    "rolled-back",
];

/// The installation a scenario starts from, as the stand-ins build it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A finished split installation of 1.0.0: both units, the layout
    /// manifest, `current`, the runtime env file.
    Split,
    /// The split 1.0.0 installation activating a staged 1.1.0, its outer
    /// journal recorded at the phase.
    Journal(&'static str),
    /// A legacy (monolith) installation: `current`, the single unit.
    Legacy,
    /// Empty roots.
    Bare,
}

impl fmt::Display for Start {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Start::Split => write!(formatter, "split 1.0.0"),
            Start::Journal(phase) => write!(formatter, "split 1.0.0 activating 1.1.0 at {phase}"),
            Start::Legacy => write!(formatter, "legacy 1.0.0"),
            Start::Bare => write!(formatter, "empty roots"),
        }
    }
}

/// One generated scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    /// The campaign's seed.
    pub seed: u64,
    /// Its index in the campaign.
    pub index: u64,
    /// The helper driven.
    pub program: Program,
    /// The starting state.
    pub start: Start,
    /// Applied in order after the state is built.
    pub damages: Vec<Damage>,
    /// Run in order.
    pub invocations: Vec<Invocation>,
}

impl Scenario {
    /// Scenario `index` of campaign `seed`: the programs in turn, then a
    /// state, one to three damages and one to three commands.
    pub fn generate(seed: u64, index: u64) -> Scenario {
        let mut random = Random::for_scenario(seed, index);
        let program = Program::ALL[(index % Program::ALL.len() as u64) as usize];
        let start = random.pick(&program.starts());
        let damages = (0..random.between(1, 3))
            .flat_map(|_| damage::generate(&mut random, program, start))
            .collect();
        let invocations = (0..random.between(1, 3))
            .map(|_| invocation::generate(&mut random, program))
            .collect();
        Scenario {
            seed,
            index,
            program,
            start,
            damages,
            invocations,
        }
    }

    /// The scenario's name in reports.
    pub fn name(&self) -> String {
        format!(
            "generated-{}-{}-{}",
            self.seed,
            self.index,
            self.program.name()
        )
    }

    /// A digest of everything the scenario does: recorded facts name the
    /// scenario they hold, so a changed generator is found, not replayed.
    pub fn fingerprint(&self) -> String {
        let digest = Sha256::digest(self.to_string().as_bytes());
        digest[..8]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }

    /// The variants one step smaller: each without one damage, one command
    /// (while another remains) or one argv variation.
    pub fn smaller(&self) -> Vec<Scenario> {
        let mut smaller = Vec::new();
        for at in 0..self.damages.len() {
            let mut candidate = self.clone();
            candidate.damages.remove(at);
            smaller.push(candidate);
        }
        if self.invocations.len() > 1 {
            for at in 0..self.invocations.len() {
                let mut candidate = self.clone();
                candidate.invocations.remove(at);
                smaller.push(candidate);
            }
        }
        for (at, invocation) in self.invocations.iter().enumerate() {
            for simpler in invocation.smaller() {
                let mut candidate = self.clone();
                candidate.invocations[at] = simpler;
                smaller.push(candidate);
            }
        }
        smaller
    }

    /// How many parts the scenario has (damages, commands, variations).
    pub fn size(&self) -> usize {
        self.damages.len()
            + self
                .invocations
                .iter()
                .map(|invocation| 1 + invocation.variations.len())
                .sum::<usize>()
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(formatter, "{} from {}", self.program.name(), self.start)?;
        for damage in &self.damages {
            writeln!(formatter, "  damage: {damage}")?;
        }
        for invocation in &self.invocations {
            writeln!(formatter, "  run: {invocation}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::{Program, Scenario, Start};

    /// The recorded seed's first 2,000 scenarios reach every helper, every
    /// starting state, every damage and every argv variation, and the same
    /// `(seed, index)` is always the same scenario.
    #[test]
    fn the_generator_covers_every_kind_and_repeats_itself() {
        let scenarios: Vec<Scenario> = (0..2_000)
            .map(|index| Scenario::generate(1, index))
            .collect();
        let programs: BTreeSet<&str> = scenarios.iter().map(|s| s.program.name()).collect();
        assert_eq!(programs.len(), Program::ALL.len());
        let starts: BTreeSet<String> = scenarios
            .iter()
            .map(|s| match s.start {
                Start::Journal(_) => "journal".to_string(),
                other => other.to_string(),
            })
            .collect();
        assert_eq!(starts.len(), 4, "{starts:?}");
        let kind = |text: String| {
            text.split(['(', ' '])
                .next()
                .unwrap_or_default()
                .to_string()
        };
        let damages: BTreeSet<String> = scenarios
            .iter()
            .flat_map(|s| s.damages.iter().map(|d| kind(format!("{:?}", d.kind))))
            .collect();
        assert_eq!(damages.len(), 20, "{damages:?}");
        let variations: BTreeSet<String> = scenarios
            .iter()
            .flat_map(|s| s.invocations.iter())
            .flat_map(|i| i.variations.iter().map(|v| kind(format!("{v:?}"))))
            .collect();
        assert_eq!(variations.len(), 9, "{variations:?}");
        for (index, scenario) in scenarios.iter().enumerate().take(50) {
            let again = Scenario::generate(1, index as u64);
            assert_eq!(&again, scenario);
            assert_eq!(again.fingerprint(), scenario.fingerprint());
        }
    }

    /// Shrinking drops one part at a time (a command with its variations)
    /// and never the last command.
    #[test]
    fn smaller_scenarios_lose_one_part() {
        for index in 0..200 {
            let scenario = Scenario::generate(1, index);
            let smaller = scenario.smaller();
            assert_eq!(
                smaller.len(),
                scenario.damages.len()
                    + if scenario.invocations.len() > 1 {
                        scenario.invocations.len()
                    } else {
                        0
                    }
                    + scenario
                        .invocations
                        .iter()
                        .map(|i| i.variations.len())
                        .sum::<usize>()
            );
            for candidate in smaller {
                assert!(
                    candidate.size() < scenario.size(),
                    "{scenario}\n{candidate}"
                );
                assert!(!candidate.invocations.is_empty());
            }
        }
    }
}
