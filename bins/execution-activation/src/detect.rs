//! `detect`: whether install.sh must run in split mode, before and under its
//! lock. A pending outer journal decides by its own metadata (recovery must
//! follow it even when the layout manifest was never published or was
//! rolled back); otherwise the installed layout manifest decides.

use std::path::Path;

use agents_common::{
    active_worker_release, entry_present, normalize_path, ActivationManifest, Error, Result,
    ACTIVATION_JOURNAL_NAME, LAYOUT_NAME, TRANSACTION_NAME,
};

/// `split` or `legacy`.
pub(crate) fn detect(root: &Path) -> Result<&'static str> {
    let root = normalize_path(root)?;
    if entry_present(&root.join(TRANSACTION_NAME))? {
        return Err(Error::runtime(
            "independent execution activation must be recovered first",
        ));
    }
    if entry_present(&root.join(ACTIVATION_JOURNAL_NAME))? {
        let (_directory, value) = ActivationManifest::read(&root, true)?;
        let split = value
            .execution()
            .is_some_and(|execution| !execution.is_empty());
        return Ok(if split { "split" } else { "legacy" });
    }
    if entry_present(&root.join(LAYOUT_NAME))? {
        active_worker_release(&root)?;
        return Ok("split");
    }
    Ok("legacy")
}
