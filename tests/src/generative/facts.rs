//! What the originals did in each generated scenario, kept as facts
//! (`tests/fixtures/generative/campaign.facts`) so the normal suite replays
//! the scenarios against the binaries without the upstream modules.
//!
//! Per scenario: its index, fingerprint and verdict, then the facets as
//! [`Observed::to_text`] writes them, except that the files facets become
//! one digest (the full listing of a thousand installations would be
//! megabytes; a replay that differs there is rerun with the originals to
//! see the files).

use std::fs;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use crate::upstream::Observed;

/// The facts file, under the fixtures folder.
pub const FACTS_FILE: &str = "generative/campaign.facts";

/// The facet holding the digest of every files facet.
const FILES_DIGEST: &str = "files digest";

/// One scenario's recorded facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedScenario {
    /// Its index in the campaign.
    pub index: u64,
    /// [`super::Scenario::fingerprint`] when it was recorded.
    pub fingerprint: String,
    /// `same` or `listed: <deviation names>`.
    pub verdict: String,
    /// The facets, condensed ([`Facts::condense`]).
    pub observed: Observed,
}

/// The recorded campaign.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The campaign's seed.
    pub seed: u64,
    /// The scenarios, by index.
    pub scenarios: Vec<RecordedScenario>,
}

impl Facts {
    /// `tests/fixtures/generative/campaign.facts`.
    pub fn path() -> PathBuf {
        crate::fixture_path(FACTS_FILE)
    }

    /// The recorded facts (panics naming the script that writes them).
    pub fn load() -> Facts {
        let path = Facts::path();
        let text = fs::read_to_string(&path).unwrap_or_else(|err| {
            panic!(
                "{}: {err} (scripts/generative-compare.sh --record writes it)",
                path.display()
            )
        });
        Facts::parse(&text)
    }

    /// The facts [`Facts::to_text`] wrote.
    pub fn parse(text: &str) -> Facts {
        let mut facts = Facts::default();
        let mut block: Option<(RecordedScenario, String)> = None;
        for line in text.lines() {
            if let Some(seed) = line.strip_prefix("seed ") {
                facts.seed = seed.parse().expect("a numeric seed");
            } else if let Some(header) = line.strip_prefix("scenario ") {
                let mut words = header.splitn(3, ' ');
                let (index, fingerprint, verdict) = (words.next(), words.next(), words.next());
                let scenario = RecordedScenario {
                    index: index.and_then(|word| word.parse().ok()).expect("an index"),
                    fingerprint: fingerprint.expect("a fingerprint").to_string(),
                    verdict: verdict.unwrap_or_default().to_string(),
                    observed: Observed::default(),
                };
                block = Some((scenario, String::new()));
            } else if line == "end" {
                let (mut scenario, body) = block.take().expect("`end` closes a scenario");
                scenario.observed = Observed::from_text(&body);
                facts.scenarios.push(scenario);
            } else if let Some((_, body)) = block.as_mut() {
                body.push_str(line);
                body.push('\n');
            }
        }
        facts
    }

    /// The facts as text.
    pub fn to_text(&self) -> String {
        let mut text = format!(
            "# What the originals did in each generated scenario \
             (scripts/generative-compare.sh --record).\nseed {}\n",
            self.seed
        );
        for scenario in &self.scenarios {
            text.push_str(&format!(
                "scenario {} {} {}\n{}end\n",
                scenario.index,
                scenario.fingerprint,
                scenario.verdict,
                scenario.observed.to_text()
            ));
        }
        text
    }

    /// Writes the facts file.
    pub fn write(&self) {
        let path = Facts::path();
        fs::create_dir_all(path.parent().expect("a fixtures folder")).expect("the folder");
        fs::write(&path, self.to_text())
            .unwrap_or_else(|err| panic!("write {}: {err}", path.display()));
    }

    /// `observed` with its files facets replaced by their digest.
    pub fn condense(observed: &Observed) -> Observed {
        let mut condensed = Observed::default();
        let mut files = Sha256::new();
        for (facet, value) in observed.facets() {
            if facet.starts_with("files") {
                files.update(format!("{facet}\n{value}\n").as_bytes());
            } else {
                condensed.record(facet, value.clone());
            }
        }
        let digest: String = files.finalize()[..16]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        condensed.record(FILES_DIGEST, digest);
        condensed
    }
}
