//! `publish`: write the candidate's worker and gateway units (or plists) and
//! `execution-layout.json` through the outer journal's write-ahead
//! `replace_config`, one kind at a time.
//!
//! The journal is re-read before each kind, never reusing stale desired
//! coordinates. A kind whose destination already is the journaled
//! publication is only re-proved against the fresh rendering.
//!
//! Deliberate deviation: after a crash between the journal record and the
//! rename, the original re-reads the staged source as a private (0600, one link)
//! file and fails once `replace_config` had set the unit's 0644 mode or
//! hard-linked the publication name, leaving rollback as the only way out.
//! The port accepts a source that is exactly the journaled inode with the
//! rendered bytes and lets `replace_config` resume it; any other source is
//! still refused as a changed staging file.
//!
//! Deliberate deviation: a publish killed while it wrote a kind's staged
//! source (created, not yet fully written, the journal not yet naming the
//! kind) left a private source holding a prefix of the rendering, which the
//! original refuses forever as changed staging. The port rewrites exactly that
//! source and continues.

use std::path::PathBuf;

use crate::replace_config::{journaled_staging_matches, replace_config};
use agents_common::{
    config_path_matches_desired, config_staging_paths, ensure_directory, entry_present,
    layout_manifest, prepare_runtime, read_owned_config, read_private_file, render_service,
    write_new_private, ActivationInvocation, ActivationManifest, Error, ExecutionLayout, Platform,
    Result, Role, ACTIVATION_CONFIG_LIMIT,
};
use python_compat::json::encode_indented;

use crate::context::with_runtime_environment;

/// The three configurations publish renders, in the original's order.
const KINDS: [&str; 3] = ["service", "gateway", "execution_layout"];

/// `publish`: writes the two units and `execution-layout.json` of the
/// candidate through the journal's write-ahead `replace_config`, so a crash
/// leaves either the old or the new file. Ports `publish(args, value)`.
pub fn publish(layout: &ExecutionLayout) -> Result<()> {
    let layout = with_runtime_environment(layout)?;
    layout.validate()?;
    prepare_runtime(&layout)?;
    let bodies = [
        render_service(&layout, Role::Worker)?,
        render_service(&layout, Role::Gateway)?,
        encode_indented(&layout_manifest(&layout)?),
    ];
    for (kind, payload) in KINDS.into_iter().zip(bodies) {
        let (_directory, current) = ActivationManifest::read(&layout.install_root, true)?;
        let destination = PathBuf::from(current.text(&format!("{kind}_path")));
        ensure_directory(&python_compat::path::parent(&destination), false)?;
        let (source, _publication) =
            config_staging_paths(&destination, current.transaction_id(), kind);
        let mode = if layout.platform == Platform::Linux && kind != "execution_layout" {
            0o644
        } else {
            0o600
        };
        let desired = current.get(&format!("desired_{kind}"));
        let journaled = desired.as_object().filter(|desired| !desired.is_empty());
        if let Some(desired) = journaled {
            if config_path_matches_desired(&destination, desired)? {
                if read_owned_config(&destination, ACTIVATION_CONFIG_LIMIT)? != payload {
                    return Err(Error::runtime(
                        "split candidate configuration changed during publication",
                    ));
                }
                continue;
            }
        }
        if !entry_present(&source)? && desired.is_null() {
            write_new_private(&source, &payload)?;
        } else if source.exists() {
            let resumable = match journaled {
                Some(desired) => journaled_staging_matches(&source, desired, &payload)?,
                None => false,
            };
            if !resumable {
                let staged = read_private_file(&source, ACTIVATION_CONFIG_LIMIT)?;
                if staged != payload {
                    // A publish killed inside `write_new_private` left its
                    // own staging unfinished: created, not yet (fully)
                    // written. The journal never recorded this kind, so
                    // nothing refers to it; redo that write. Any other
                    // content is someone else's and is still refused.
                    if !(desired.is_null() && payload.starts_with(&staged)) {
                        return Err(Error::runtime(
                            "split candidate configuration staging changed",
                        ));
                    }
                    std::fs::remove_file(&source)
                        .map_err(|err| Error::from_io_path(&err, &source))?;
                    write_new_private(&source, &payload)?;
                }
            }
        }
        let call = ActivationInvocation::owned(&current, &layout.install_root);
        replace_config(&call, kind, &source, mode)?;
    }
    Ok(())
}
