//! Showing a path in the desktop's file manager (F.8 reveal): freedesktop `FileManager1` over
//! D-Bus (`ShowItems` for a file or link, `ShowFolders` for a folder) through `dbus-send`, each
//! argument its own argv element; without that service, `xdg-open` on the folder. A file is
//! never opened. Nothing answered: 409.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use handler_contracts::files::Reveal;

use super::FilesError;

/// How long the file manager has to answer over D-Bus.
const DBUS_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `xdg-open` may take.
const XDG_OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Asks the file manager to show `what`; else `xdg-open` on `folder` (the folder `what` is in,
/// or the folder itself).
pub(super) async fn show(what: &Reveal, folder: &Path) -> Result<(), FilesError> {
    let argv = what.dbus_send_argv(u32::try_from(DBUS_TIMEOUT.as_millis()).unwrap_or(5000));
    let dbus = run(&argv[0], &argv[1..], DBUS_TIMEOUT + Duration::from_secs(1)).await;
    let dbus_reason = match dbus {
        Ok(()) => return Ok(()),
        Err(reason) => reason,
    };
    let folder = folder.as_os_str().to_string_lossy().into_owned();
    match run("xdg-open", &[folder], XDG_OPEN_TIMEOUT).await {
        Ok(()) => Ok(()),
        Err(xdg) => Err(FilesError::NoDesktop(format!(
            "no desktop's file manager answered (FileManager1 over D-Bus: {dbus_reason}; xdg-open: {xdg})"
        ))),
    }
}

/// Runs `program args…` (no shell), its output discarded: `Err` says why it did not succeed.
async fn run(program: &str, args: &[String], timeout: Duration) -> Result<(), String> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(s)) if s.success() => Ok(()),
        Ok(Ok(s)) => Err(format!("{program} {s}")),
        Ok(Err(e)) => Err(format!("{program}: {e}")),
        Err(_) => {
            let _ = child.start_kill();
            let _ = child.wait().await;
            Err(format!("{program} did not answer within {timeout:?}"))
        }
    }
}
