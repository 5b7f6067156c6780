//! `require_retired_legacy_intent`: an old updater's recovery intent may be
//! replaced by a new admitted update only after every historical recovery
//! owner is proven finalized, retired, unregistered and stopped.
//!
//! This reads historical evidence only; it never loads or runs an owner's
//! bootstrap (a retired owner's payload may predate newer modules).

use std::path::Path;

use sha2::{Digest, Sha256};

use agents_common::{
    check_binding, entry_present, evidence_digest, normalize_path, owned_directory,
    recovery_directory, recovery_evidence, recovery_service_path, Error, ExecutionLayout,
    RecoveryService, Result, SystemCommandRunner, ACTIVATION_JOURNAL_NAME, INTENT_KEYS,
    RECOVERY_DIRECTORY, RECOVERY_OWNER_KEYS, RECOVERY_PAYLOAD, TRANSACTION_NAME,
};
use python_compat::{
    hex,
    json::{encode_indented, Json, JsonObject},
    path::pure_path_text,
};

/// Most historical owners the check walks.
const MAX_OWNERS: usize = 4096;

fn no_journal(root: &Path) -> Result<()> {
    for name in [
        ACTIVATION_JOURNAL_NAME,
        TRANSACTION_NAME,
        ".execution-uninstall.json",
    ] {
        if entry_present(&root.join(name))? {
            return Err(Error::runtime(
                "a lifecycle journal still owns the previous recovery intent",
            ));
        }
    }
    Ok(())
}

fn has_exact_keys(object: &JsonObject, keys: &[&str]) -> bool {
    object.len() == keys.len() && keys.iter().all(|key| object.contains_key(key))
}

fn is_hex32(value: Option<&Json>) -> bool {
    let text = match value {
        Some(Json::Str(text)) => text.clone(),
        Some(Json::Int(number)) => number.to_string(),
        _ => return false,
    };
    text.len() == 32
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Refuses to go on while a legacy updater's recovery intent is still live:
/// only an intent whose owner has retired may be replaced by the split
/// layout's. Ports `require_retired_legacy_intent(layout, previous, intent)`.
pub(crate) fn require_retired_legacy_intent(
    layout: &ExecutionLayout,
    previous: &Json,
    intent: &JsonObject,
) -> Result<()> {
    let root = &layout.install_root;
    no_journal(root)?;
    let null = Json::Null;
    let field = |key: &str| previous.get(key).unwrap_or(&null);
    let root_text = Json::from(pure_path_text(root));
    let different_update = previous
        .as_object()
        .is_some_and(|object| has_exact_keys(object, &INTENT_KEYS))
        && field("format").as_int() == Some(1)
        && field("root") == &root_text
        && Some(field("server_identity")) == intent.get("server_identity")
        && field("version")
            .as_str()
            .is_some_and(|version| !version.is_empty())
        && field("api_contract")
            .as_int()
            .is_some_and(|contract| contract >= 1)
        && is_hex32(previous.get("update_id"))
        && Some(field("update_id")) != intent.get("update_id");
    if !different_update {
        return Err(Error::runtime(
            "previous recovery intent is not a different admitted update",
        ));
    }
    check_binding(root, field("root_binding"))?;
    let parent = root.join(RECOVERY_DIRECTORY);
    normalize_path(&parent)?;
    if !entry_present(&parent)? {
        // A pre-arm failure: no recovery owner was ever published.
        return no_journal(root);
    }
    owned_directory(&parent, true)?;
    let entries: Vec<String> = std::fs::read_dir(&parent)
        .map_err(|error| Error::from_io_path(&error, &parent))?
        .map(|entry| {
            entry
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .map_err(|error| Error::from_io_path(&error, &parent))
        })
        .collect::<Result<_>>()?;
    if entries.len() > MAX_OWNERS {
        return Err(Error::runtime("too many historical recovery owners"));
    }
    let digest = hex(&Sha256::digest(encode_indented(previous)));
    let binding = Json::Object(python_compat::json_object! {
        "format" => 1,
        "path" => pure_path_text(layout.state_root.join("admin/server-update.json")),
        "update_id" => field("update_id").clone(),
        "target_version" => field("version").clone(),
        "intent_sha256" => digest,
    });
    let mut matched = 0;
    for name in entries {
        matched += usize::from(check_owner(layout, previous, &binding, &name)?);
    }
    if matched > 1 {
        return Err(Error::runtime(
            "previous recovery intent has no unique retired owner",
        ));
    }
    // No matching owner is an interrupted pre-arm attempt; every other owner
    // above was nevertheless terminal and absent from native jobs.
    no_journal(root)
}

/// One historical owner: this installation's, finalized after a healthy
/// rollback, retired, unregistered and stopped. Returns whether it is the
/// owner of the previous intent.
fn check_owner(
    layout: &ExecutionLayout,
    previous: &Json,
    binding: &Json,
    name: &str,
) -> Result<bool> {
    let root = &layout.install_root;
    let directory = recovery_directory(root, name)?;
    let owner = recovery_evidence(&directory.join("owner.json"))?;
    let null = Json::Null;
    let own = |key: &str| owner.get(key).unwrap_or(&null);
    let prev = |key: &str| previous.get(key).unwrap_or(&null);
    let text = |path: &Path| Json::from(pure_path_text(path));
    let this_installation = has_exact_keys(&owner, &RECOVERY_OWNER_KEYS)
        && own("format").as_int() == Some(1)
        && own("root") == &text(root)
        && own("transaction_id") == &Json::from(name)
        && own("expected_server_identity") == prev("server_identity")
        && own("home") == &text(&layout.home)
        && own("platform") == &Json::from(layout.platform.as_str())
        && own("state_root") == &text(&layout.state_root)
        && own("config_root") == &text(&layout.config_root);
    if !this_installation {
        return Err(Error::runtime(
            "historical recovery owner belongs to another installation",
        ));
    }
    check_binding(root, own("root_binding"))?;
    let status_binding = own("status_binding");
    let previous_owner = own("managed_update_id") == prev("update_id")
        || status_binding
            .as_object()
            .is_some_and(|status| status.get("update_id").unwrap_or(&null) == prev("update_id"));
    if previous_owner
        && (status_binding != binding
            || own("root_binding") != prev("root_binding")
            || own("source_binding") != prev("candidate_binding")
            || own("managed_update_id") != prev("update_id")
            || own("version") != prev("version")
            || own("api_contract") != prev("api_contract"))
    {
        return Err(Error::runtime(
            "retired recovery owner differs from its admitted intent",
        ));
    }
    let payload = own("payload").as_object();
    let inventory_ok = payload.is_some_and(|payload| {
        RECOVERY_PAYLOAD
            .iter()
            .filter(|name| **name != "execution_http.py")
            .all(|name| payload.contains_key(name))
            && payload
                .keys()
                .all(|key| RECOVERY_PAYLOAD.contains(&key.as_str()))
    });
    let Some(payload) = payload.filter(|_| inventory_ok) else {
        return Err(Error::runtime(
            "historical recovery bootstrap inventory is invalid",
        ));
    };
    for (file, expected) in payload.iter() {
        if &Json::from(evidence_digest(&directory.join(file))?) != expected {
            return Err(Error::runtime("historical recovery bootstrap changed"));
        }
    }
    let terminal = recovery_evidence(&directory.join("terminal.json"))?;
    let health = terminal
        .get("snapshot")
        .and_then(Json::as_object)
        .and_then(|snapshot| snapshot.get("health"));
    let terminal_null = Json::Null;
    let term = |key: &str| terminal.get(key).unwrap_or(&terminal_null);
    let finalized = Json::Object(python_compat::json_object! {
        "format" => 1,
        "transaction_id" => name,
        "terminal_sha256" => evidence_digest(&directory.join("terminal.json"))?,
    });
    let proven = Json::Object(recovery_evidence(&directory.join("finalized.json"))?) == finalized
        && Json::Object(recovery_evidence(&directory.join("retired.json"))?) == finalized
        && has_exact_keys(
            &terminal,
            &["format", "transaction_id", "phase", "snapshot"],
        )
        && term("format").as_int() == Some(1)
        && term("transaction_id") == &Json::from(name)
        && term("phase") == &Json::from("rollback-healthy")
        && health.is_some_and(|health| {
            health.as_object().is_some()
                && health.get("server_identity").unwrap_or(&Json::Null) == prev("server_identity")
        });
    if !proven {
        return Err(Error::runtime(
            "previous recovery intent lacks finalized rollback proof",
        ));
    }
    let platform = own("platform").as_str().unwrap_or_default();
    let home = Path::new(own("home").as_str().unwrap_or_default());
    let service = recovery_service_path(name, platform, home);
    let commands = SystemCommandRunner::default();
    if entry_present(&service)?
        || RecoveryService::new(name, platform, &commands).running(&service)?
    {
        return Err(Error::runtime(
            "previous recovery owner is still registered or running",
        ));
    }
    Ok(previous_owner)
}
