//! Runs (D.18): a session of an agent with an interface. Its start checked (400 `input
//! invalid`: a field, a missing or unexpected subject, an unusable skill; prompt and
//! acpSessionId refused), the subject's digest recorded and its read-only mount at
//! `/subject/<name>`, the first turn built by the pure `handler_contracts::run`.

use handler_contracts::control::{InterfaceSubject, SessionInput, SkillScan};
use handler_contracts::run::{self, FirstTurn, SubjectView};
use handler_contracts::session::SessionRequest;

use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::services::skills;
use crate::daemon::state::AppState;
use crate::daemon::store::StoredAgent;

use crate::daemon::launch::resolve::subject_path;

/// The name of a run's subject skill (D.18), when it has one: resolve mounts it.
pub(crate) fn subject_of(input: &SessionInput) -> Option<String> {
    Some(input.subject.as_ref()?.skill.clone())
}

/// A run's start: its input (the subject's digest set), its first turn and its title.
pub(crate) struct RunStart {
    pub input: SessionInput,
    pub prompt: String,
    pub title: String,
}

/// What the terms of `account`'s vendor say of its use by a run (B.1 `login.unattended`,
/// decision 0151); none for an unknown account, a harness without a login or a provider.
pub(crate) fn unattended_use(
    snap: &crate::daemon::store::catalog::Snapshot,
    account: &str,
) -> Option<run::UnattendedUse> {
    let a = snap.accounts.get(account)?.as_ref().ok()?;
    let d = snap.descriptors.get(&a.harness)?;
    Some(run::unattended_use(account, &d.product, d.login.as_ref()?))
}

/// A run on `account`: refused when its vendor's terms forbid an automation (400 `model access
/// unusable`, the reason), warned in the log when they are unclear.
fn check_account(app: &AppState, account: Option<&str>) -> ApiResult<()> {
    let Some(account) = account else {
        return Ok(());
    };
    match unattended_use(&app.snapshot(), account) {
        Some(run::UnattendedUse::Refused(why)) => {
            Err(ApiError::bad_request("model access unusable", why))
        }
        Some(run::UnattendedUse::Warn(w)) => {
            tracing::warn!("a run: {w}");
            Ok(())
        }
        _ => Ok(()),
    }
}

fn invalid(detail: impl Into<String>) -> ApiError {
    ApiError::bad_request("input invalid", detail)
}

/// D.18: what `req` starts for `agent`: `None` for a conversation (an input refused), a run's
/// start for an agent with an interface (input required, prompt and acpSessionId refused, its
/// `account`'s vendor's terms consulted: [`check_account`]).
pub(crate) fn start(
    app: &AppState,
    agent: &StoredAgent,
    req: &SessionRequest,
    account: Option<&str>,
) -> ApiResult<Option<RunStart>> {
    let Some(iface) = &agent.options.interface else {
        if req.input.is_some() {
            return Err(invalid(
                "input: this agent has no interface (a conversation)",
            ));
        }
        return Ok(None);
    };
    let Some(input) = &req.input else {
        return Err(invalid("input: required for an agent with an interface"));
    };
    if req.prompt.is_some() {
        return Err(invalid("prompt: a run's first turn is handlerd's"));
    }
    if req.acp_session_id.is_some() {
        return Err(invalid("acpSessionId: a run starts a new session"));
    }
    run::check_input(iface, input).map_err(|e| invalid(e.to_string()))?;
    check_account(app, account)?;
    let mut input = input.clone();
    let mut subject = None;
    if let (Some(InterfaceSubject::Skill), Some(s)) = (iface.subject, input.subject.as_mut()) {
        let info = skills::info(app, &s.skill, true)
            .map_err(|_| invalid(format!("input.subject.skill: no skill {:?}", s.skill)))?;
        if let Some(e) = info.error {
            return Err(invalid(format!("input.subject.skill: {e}")));
        }
        s.digest = info.digest.clone();
        subject = Some((s.skill.clone(), info));
    }
    let path = subject.as_ref().map(|(n, _)| subject_path(n));
    let empty = SkillScan::default();
    let view = subject
        .as_ref()
        .zip(path.as_deref())
        .map(|((n, i), p)| SubjectView {
            name: n,
            path: p,
            digest: i.digest.as_deref().unwrap_or_default(),
            scan: i.scan.as_ref().unwrap_or(&empty),
        });
    let prompt = run::first_turn(&FirstTurn {
        instructions: agent.instructions.as_deref(),
        input: &input,
        subject: view,
        result: &iface.result,
    });
    let name = agent.name.clone().unwrap_or_else(|| agent.id.clone());
    let title = match &subject {
        Some((n, _)) => format!("{name} ({n})"),
        None => name,
    };
    Ok(Some(RunStart {
        input,
        prompt,
        title,
    }))
}

/// D.18 `fromSkill`: only for a folderless agent (400 otherwise) and a usable skill.
pub(crate) fn check_from_skill(app: &AppState, agent: &StoredAgent, skill: &str) -> ApiResult<()> {
    if agent.scope.is_some() {
        return Err(ApiError::bad_request(
            "fromSkill invalid",
            "fromSkill: only for an agent without a folder (its sessions work in their own)",
        ));
    }
    let info = skills::info(app, skill, false).map_err(|_| {
        ApiError::bad_request("skill unusable", format!("fromSkill: no skill {skill:?}"))
    })?;
    if let Some(e) = info.error {
        return Err(ApiError::bad_request(
            "skill unusable",
            format!("fromSkill: {e}"),
        ));
    }
    Ok(())
}

/// The skill's files (its SKILL.md and the others; no hidden ones, no links) copied into a
/// session's own folder.
pub(crate) fn copy_skill(app: &AppState, skill: &str, work: &std::path::Path) -> ApiResult<()> {
    let dir = skills::existing(app, skill)?;
    let files = crate::daemon::store::skills::skill_files(&dir)
        .map_err(|e| ApiError::internal(format!("{skill}: {e}")))?;
    for f in files {
        let bytes = std::fs::read(dir.join(&f.path))
            .map_err(|e| ApiError::internal(format!("{}: {e}", f.path)))?;
        skills::write_file(&work.join(&f.path), &bytes, f.executable)?;
    }
    Ok(())
}
