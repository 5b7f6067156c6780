//! Both sides of a generated scenario compared, the listed deviations told
//! apart from differences, and a difference re-run and shrunk.

use std::collections::{BTreeMap, BTreeSet};

use super::damage::DamageKind;
use super::facts::{Facts, RecordedScenario};
use super::invocation::Variation;
use super::run::{Bench, Reference, SideRun};
use super::scenario::Scenario;
use crate::upstream::Observed;

/// A difference docs/design/deviations.md lists for generated scenarios:
/// where it applies, the port is stricter on purpose.
pub struct GenerativeDeviation {
    /// Its name in reports and recorded verdicts.
    pub name: &'static str,
    /// Its entry in docs/design/deviations.md.
    pub entry: &'static str,
    /// Whether it explains the scenario's `facet` differing.
    applies: fn(&Scenario, &Observed, &Observed, &str) -> bool,
}

/// The step a facet belongs to (`step 2 stderr` → `step 2`).
fn step_of(facet: &str) -> Option<&str> {
    let rest = facet.strip_prefix("step ")?;
    let end = rest.find(' ')?;
    Some(&facet[..5 + end])
}

/// The original waited on a FIFO put where a file belongs; the port refused.
fn waits_on_a_fifo(scenario: &Scenario, reference: &Observed, _: &Observed, _: &str) -> bool {
    scenario
        .damages
        .iter()
        .any(|damage| damage.kind == DamageKind::Fifo)
        && reference
            .facets()
            .values()
            .any(|value| value == "waited past the deadline")
}

/// The port refuses an argv value that is not UTF-8 at the boundary.
fn refuses_non_utf8(scenario: &Scenario, _: &Observed, tested: &Observed, facet: &str) -> bool {
    let non_utf8 = scenario.invocations.iter().any(|invocation| {
        invocation
            .variations
            .iter()
            .any(|variation| matches!(variation, Variation::NonUtf8(_)))
    });
    let refused = |step: &str| {
        tested
            .facets()
            .get(&format!("{step} stderr"))
            .is_some_and(|line| line.contains("UTF-8") || line.contains("control characters"))
    };
    non_utf8
        && match step_of(facet) {
            Some(step) => refused(step),
            None => tested
                .facets()
                .keys()
                .any(|key| key.ends_with(" stderr") && refused(step_of(key).unwrap_or(""))),
        }
}

/// The original records `cryptography`'s empty `InvalidSignature` text as
/// the failed row's message; the port names the failure.
fn names_an_invalid_signature(
    _: &Scenario,
    reference: &Observed,
    tested: &Observed,
    facet: &str,
) -> bool {
    const EMPTY: &str = "\"message\": \"\"";
    const NAMED: &str = "\"message\": \"release manifest signature is invalid\"";
    facet.ends_with("server-update.json")
        && match (reference.facets().get(facet), tested.facets().get(facet)) {
            (Some(original), Some(port)) => {
                original.contains(EMPTY) && original.replace(EMPTY, NAMED) == *port
            }
            _ => false,
        }
}

/// Every deviation a generated scenario may show.
pub const GENERATIVE_DEVIATIONS: [GenerativeDeviation; 3] = [
    GenerativeDeviation {
        name: "fifo",
        entry: "every helper, a FIFO where a file belongs",
        applies: waits_on_a_fifo,
    },
    GenerativeDeviation {
        name: "invalid-signature",
        entry: "update-runner: a manifest signature that does not verify is named",
        applies: names_an_invalid_signature,
    },
    GenerativeDeviation {
        name: "non-utf8-argv",
        entry: "execution-activation, execution-manage and update-runner, argv that is not UTF-8",
        applies: refuses_non_utf8,
    },
];

/// How a scenario compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every facet the same.
    Same,
    /// Only listed deviations differ (their names).
    Listed(Vec<&'static str>),
    /// These facets differ beyond the listed deviations.
    Differs(Vec<String>),
}

impl Verdict {
    /// The verdict as the facts record it.
    pub fn recorded(&self) -> String {
        match self {
            Verdict::Same => "same".to_string(),
            Verdict::Listed(names) => format!("listed: {}", names.join(", ")),
            Verdict::Differs(facets) => format!("differs: {}", facets.join(", ")),
        }
    }
}

/// Compares `tested` with `reference` facet by facet.
pub fn judge(scenario: &Scenario, reference: &Observed, tested: &Observed) -> Verdict {
    let facets: BTreeSet<&String> = reference
        .facets()
        .keys()
        .chain(tested.facets().keys())
        .collect();
    let mut listed = Vec::new();
    let mut differing = Vec::new();
    for facet in facets {
        if reference.facets().get(facet) == tested.facets().get(facet) {
            continue;
        }
        let explained = GENERATIVE_DEVIATIONS
            .iter()
            .find(|deviation| (deviation.applies)(scenario, reference, tested, facet));
        match explained {
            Some(deviation) if !listed.contains(&deviation.name) => listed.push(deviation.name),
            Some(_) => {}
            None => differing.push(facet.clone()),
        }
    }
    match (differing.is_empty(), listed.is_empty()) {
        (false, _) => Verdict::Differs(differing),
        (true, false) => Verdict::Listed(listed),
        (true, true) => Verdict::Same,
    }
}

/// A difference found, checked for determinism and shrunk.
#[derive(Debug, Clone)]
pub struct Difference {
    /// The generated scenario.
    pub scenario: Scenario,
    /// Its differing facets.
    pub facets: Vec<String>,
    /// Whether a second run of both sides differed in the same facets.
    pub deterministic: bool,
    /// The smallest scenario found that still differs.
    pub minimal: Scenario,
    /// The minimal scenario's differing facets, each with both values.
    pub minimal_facets: Vec<(String, Option<String>, Option<String>)>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            formatter,
            "{}: differs in {} ({})",
            self.scenario.name(),
            self.facets.join(", "),
            if self.deterministic {
                "deterministic"
            } else {
                "NOT deterministic"
            }
        )?;
        writeln!(formatter, "minimal reproduction:\n{}", self.minimal)?;
        for (facet, reference, tested) in &self.minimal_facets {
            writeln!(
                formatter,
                "  {facet}\n    reference: {reference:?}\n    tested:    {tested:?}"
            )?;
        }
        Ok(())
    }
}

/// Figures of a campaign run.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Scenarios run.
    pub scenarios: usize,
    /// Commands run (per side).
    pub steps: usize,
    /// Scenarios the same in every facet.
    pub same: usize,
    /// Scenarios that differ only by a listed deviation, by its name.
    pub listed: BTreeMap<String, usize>,
    /// Scenarios that differ beyond the listed deviations.
    pub differing: usize,
    /// Differing scenarios by program and facet kind.
    pub differs: BTreeMap<String, usize>,
}

impl Tally {
    /// Counts one scenario's verdict.
    pub fn count(&mut self, scenario: &Scenario, verdict: &Verdict) {
        self.scenarios += 1;
        self.steps += scenario.invocations.len();
        match verdict {
            Verdict::Same => self.same += 1,
            Verdict::Listed(names) => {
                for name in names {
                    let class = format!("{} {name}", scenario.program.name());
                    *self.listed.entry(class).or_default() += 1;
                }
            }
            Verdict::Differs(facets) => {
                self.differing += 1;
                let kinds: BTreeSet<&str> = facets.iter().map(|facet| facet_kind(facet)).collect();
                for kind in kinds {
                    let class = format!("{} {kind}", scenario.program.name());
                    *self.differs.entry(class).or_default() += 1;
                }
            }
        }
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            formatter,
            "scenarios {}, steps {}, same {}, listed deviations only {}, differing {}",
            self.scenarios,
            self.steps,
            self.same,
            self.scenarios - self.same - self.differing,
            self.differing,
        )?;
        for (name, count) in &self.listed {
            writeln!(formatter, "  listed {name}: {count}")?;
        }
        for (class, count) in &self.differs {
            writeln!(formatter, "  differs {class}: {count}")?;
        }
        Ok(())
    }
}

/// `exit`, `stdout`, `stderr`, `files` or `systemctl`.
fn facet_kind(facet: &str) -> &str {
    if facet.starts_with("files") {
        "files"
    } else {
        facet.rsplit(' ').next().unwrap_or(facet)
    }
}

/// A campaign over one bench.
pub struct Campaign {
    /// Where the sides run.
    pub bench: Bench,
}

impl Campaign {
    /// Runs `scenario` on the reference's side and on `tested`, and judges.
    pub fn compare(
        &self,
        scenario: &Scenario,
        reference: Reference,
        tested: SideRun,
    ) -> (Verdict, Observed, Observed) {
        let expected = self.bench.run(scenario, reference.side());
        let observed = self.bench.run(scenario, tested);
        if std::env::var_os(crate::upstream::VERBOSE_ENV).is_some() {
            eprintln!("=== {}\n{scenario}", scenario.name());
            for (facet, value) in expected.facets() {
                eprintln!("=== {facet}\n  {}", value.replace('\n', "\n  "));
            }
        }
        (judge(scenario, &expected, &observed), expected, observed)
    }

    /// Re-runs a differing scenario, then shrinks it: drops damages,
    /// commands and variations one at a time while a difference remains.
    pub fn investigate(
        &self,
        scenario: &Scenario,
        facets: Vec<String>,
        reference: Reference,
        tested: SideRun,
    ) -> Difference {
        let again = self.compare(scenario, reference, tested).0;
        let deterministic = again == Verdict::Differs(facets.clone());
        let mut minimal = scenario.clone();
        'shrink: loop {
            for candidate in minimal.smaller() {
                if matches!(
                    self.compare(&candidate, reference, tested).0,
                    Verdict::Differs(_)
                ) {
                    minimal = candidate;
                    continue 'shrink;
                }
            }
            break;
        }
        let (verdict, expected, observed) = self.compare(&minimal, reference, tested);
        let minimal_facets = match verdict {
            Verdict::Differs(names) => names
                .into_iter()
                .map(|facet| {
                    let pair = (
                        expected.facets().get(&facet).cloned(),
                        observed.facets().get(&facet).cloned(),
                    );
                    (facet, pair.0, pair.1)
                })
                .collect(),
            _ => Vec::new(),
        };
        Difference {
            scenario: scenario.clone(),
            facets,
            deterministic,
            minimal,
            minimal_facets,
        }
    }

    /// Runs `tested` on a recorded scenario and judges it against the
    /// original's recorded facets (condensed alike).
    pub fn replay(
        &self,
        recorded: &RecordedScenario,
        scenario: &Scenario,
        tested: SideRun,
    ) -> Verdict {
        assert_eq!(
            scenario.fingerprint(),
            recorded.fingerprint,
            "{}: the generator no longer makes the scenario that was recorded; \
             rerun scripts/generative-compare.sh --record",
            scenario.name()
        );
        let observed = Facts::condense(&self.bench.run(scenario, tested));
        let verdict = judge(scenario, &recorded.observed, &observed);
        if let Verdict::Differs(facets) = &verdict {
            for facet in facets {
                eprintln!(
                    "--- {}: {facet}\n  recorded: {:?}\n  now:      {:?}",
                    scenario.name(),
                    recorded.observed.facets().get(facet),
                    observed.facets().get(facet)
                );
            }
        }
        verdict
    }
}
