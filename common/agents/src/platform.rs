//! The two hosts a split installation runs on, named once: `Linux` (systemd
//! user units) and `Darwin` (launchd agents).
//!
//! The originals carry the platform as a string and fall back two ways on
//! any other text: paths and labels take the systemd form unless it is
//! `Darwin`, service commands take launchctl unless it is `Linux`, and only
//! layout validation refuses it. A platform is parsed once where it enters
//! (the layout manifest, `--platform`, a recovery registration) into a
//! [`PlatformName`], which keeps the text of an unsupported one so each step
//! still refuses or falls back where the original does and the JSON written
//! back holds the same string.

use crate::error::{Error, Result};
use crate::named::Named;

/// A host platform the execution layout supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Platform {
    /// Linux: systemd user units under `~/.config/systemd/user`.
    Linux,
    /// macOS: launchd agents under `~/Library/LaunchAgents`.
    Darwin,
}

impl Platform {
    /// Both platforms.
    pub const ALL: [Platform; 2] = [Platform::Linux, Platform::Darwin];

    /// The originals' spelling (`platform.system()`, `uname -s`), also the
    /// value stored in layouts and recovery registrations.
    pub fn as_str(self) -> &'static str {
        match self {
            Platform::Linux => "Linux",
            Platform::Darwin => "Darwin",
        }
    }

    /// Reads a platform name; anything but `Linux` or `Darwin` is ValueError
    /// `unsupported execution service platform` (layout validation's refusal).
    pub fn parse(name: &str) -> Result<Platform> {
        match PlatformName::parse(name) {
            PlatformName::Supported(platform) => Ok(platform),
            PlatformName::Unsupported(_) => Err(unsupported()),
        }
    }

    /// The platform this binary was built for, when it is one of the two.
    pub fn host() -> Option<Platform> {
        if cfg!(target_os = "macos") {
            Some(Platform::Darwin)
        } else if cfg!(target_os = "linux") {
            Some(Platform::Linux)
        } else {
            None
        }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl Named for Platform {
    fn parse(name: &str) -> Result<Platform> {
        Platform::parse(name)
    }
}

/// A platform as recorded or given: a supported one, or the exact text of one
/// that is not, kept because the originals accept any string until a later
/// step (validation, a pinned request) refuses it, and write it back as given.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PlatformName {
    /// `Linux` or `Darwin`.
    Supported(Platform),
    /// Any other text (empty when the value was missing or not a string).
    Unsupported(String),
}

impl PlatformName {
    /// Classifies `text` exactly (case and whitespace count).
    pub fn parse(text: &str) -> PlatformName {
        match Platform::ALL
            .into_iter()
            .find(|platform| platform.as_str() == text)
        {
            Some(platform) => PlatformName::Supported(platform),
            None => PlatformName::Unsupported(text.to_string()),
        }
    }

    /// The text as given: the platform's name, or the unsupported text.
    pub fn as_str(&self) -> &str {
        match self {
            PlatformName::Supported(platform) => platform.as_str(),
            PlatformName::Unsupported(text) => text,
        }
    }

    /// The supported platform, if it is one.
    pub fn supported(&self) -> Option<Platform> {
        match self {
            PlatformName::Supported(platform) => Some(*platform),
            PlatformName::Unsupported(_) => None,
        }
    }

    /// The supported platform, or ValueError `unsupported execution service
    /// platform` (layout validation's refusal).
    pub fn require(&self) -> Result<Platform> {
        self.supported().ok_or_else(unsupported)
    }

    /// Whether service files and labels take the launchd form: only for
    /// `Darwin`; every other text gets the systemd form, as in the originals.
    pub fn uses_launchd_paths(&self) -> bool {
        *self == Platform::Darwin
    }

    /// Whether service commands go to `systemctl --user`: only for `Linux`;
    /// every other text takes the launchctl branch, as in the originals.
    pub fn uses_systemctl(&self) -> bool {
        *self == Platform::Linux
    }
}

impl From<Platform> for PlatformName {
    fn from(platform: Platform) -> PlatformName {
        PlatformName::Supported(platform)
    }
}

/// Lets a call that takes a platform accept a recorded one by reference.
impl From<&PlatformName> for PlatformName {
    fn from(name: &PlatformName) -> PlatformName {
        name.clone()
    }
}

impl PartialEq<Platform> for PlatformName {
    fn eq(&self, platform: &Platform) -> bool {
        self.supported() == Some(*platform)
    }
}

impl std::fmt::Display for PlatformName {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

fn unsupported() -> Error {
    Error::value("unsupported execution service platform")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_other_text_is_kept_unsupported() {
        for platform in Platform::ALL {
            assert_eq!(Platform::parse(platform.as_str()).unwrap(), platform);
            let name = PlatformName::parse(platform.as_str());
            assert_eq!(name, platform);
            assert_eq!(name.as_str(), platform.as_str());
        }
        for bad in ["", "linux", "darwin", "Windows", "Linux ", " Darwin"] {
            assert_eq!(
                Platform::parse(bad).unwrap_err().python_line(),
                "ValueError: unsupported execution service platform"
            );
            let name = PlatformName::parse(bad);
            assert_eq!(name, PlatformName::Unsupported(bad.to_string()));
            assert_eq!(name.as_str(), bad);
            assert!(name.supported().is_none());
            // The two fallbacks of the originals: systemd paths, launchctl commands.
            assert!(!name.uses_launchd_paths());
            assert!(!name.uses_systemctl());
        }
        let linux = PlatformName::from(Platform::Linux);
        assert!(linux.uses_systemctl() && !linux.uses_launchd_paths());
        let darwin = PlatformName::from(Platform::Darwin);
        assert!(darwin.uses_launchd_paths() && !darwin.uses_systemctl());
    }
}
