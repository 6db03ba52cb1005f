//! The toolbox (B.6): the user's folder (`$HANDLER_TOOLBOX_DIR`, default
//! `<config>/toolbox/`) made from the platform's default on the first start and never changed
//! by Handler afterwards but through `PUT /v1/toolbox/containerfile`; `GET /v1/toolbox`.

use std::path::Path;

use handler_contracts::control::{ToolboxContainerfile, ToolboxContainerfileUpdate, ToolboxInfo};
use handler_harness::descriptors::{TOOLBOX_CONTAINERFILE, TOOLBOX_MANIFEST};

use super::facts;
use crate::daemon::fsutil;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;

/// The largest Containerfile `PUT /v1/toolbox/containerfile` takes.
pub const MAX_CONTAINERFILE: usize = 256 * 1024;

/// Makes the toolbox folder from the platform's default when it does not exist (a first
/// start); an existing folder is never touched.
pub fn install_default(dir: &Path) -> std::io::Result<bool> {
    if dir.exists() {
        return Ok(false);
    }
    fsutil::create_dir_private(dir)?;
    fsutil::write_atomic(
        &dir.join("Containerfile"),
        TOOLBOX_CONTAINERFILE.as_bytes(),
        0o644,
    )?;
    fsutil::write_atomic(
        &dir.join("toolbox.toml"),
        TOOLBOX_MANIFEST.as_bytes(),
        0o644,
    )?;
    Ok(true)
}

/// The rules behind GET /v1/toolbox.
pub async fn info(app: &AppState) -> ToolboxInfo {
    let f = facts(app, &app.config.toolbox_image, false).await;
    ToolboxInfo {
        image: app.config.toolbox_image.clone(),
        image_present: f.present,
        built_at: f.built_at,
        directory: app.config.toolbox_dir.display().to_string(),
    }
}

/// The rules behind GET /v1/toolbox/containerfile: the user's, and the default beside it.
pub async fn containerfile(app: &AppState) -> ApiResult<ToolboxContainerfile> {
    let p = app.config.toolbox_dir.join("Containerfile");
    let content = fsutil::read_optional(&p)
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError::not_found(format!("the toolbox Containerfile {}", p.display())))?;
    Ok(ToolboxContainerfile {
        content,
        default_content: TOOLBOX_CONTAINERFILE.to_string(),
    })
}

/// Why a Containerfile is refused (pure): 413 over 256 KiB, 400 without a FROM.
pub fn refuse(content: &str) -> Option<ApiError> {
    if content.len() > MAX_CONTAINERFILE {
        return Some(ApiError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            "containerfile too large",
            format!(
                "content: {} bytes, at most {MAX_CONTAINERFILE} (256 KiB)",
                content.len()
            ),
        ));
    }
    let has_from = content.lines().any(|l| {
        l.trim_start()
            .get(..5)
            .is_some_and(|w| w.eq_ignore_ascii_case("from "))
    });
    (!has_from).then(|| {
        ApiError::bad_request(
            "containerfile invalid",
            "content: no FROM instruction (the toolbox must name its base image)",
        )
    })
}

/// The rules behind PUT /v1/toolbox/containerfile.
pub async fn put_containerfile(
    app: &AppState,
    req: ToolboxContainerfileUpdate,
) -> ApiResult<ToolboxContainerfile> {
    if let Some(e) = refuse(&req.content) {
        return Err(e);
    }
    let dir = &app.config.toolbox_dir;
    fsutil::create_dir_private(dir).map_err(ApiError::internal)?;
    fsutil::write_atomic(&dir.join("Containerfile"), req.content.as_bytes(), 0o644)
        .map_err(ApiError::internal)?;
    containerfile(app).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_copied_once_and_never_again() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("toolbox");
        assert!(install_default(&dir).unwrap());
        assert_eq!(
            std::fs::read_to_string(dir.join("Containerfile")).unwrap(),
            TOOLBOX_CONTAINERFILE
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("toolbox.toml")).unwrap(),
            TOOLBOX_MANIFEST
        );
        std::fs::write(dir.join("Containerfile"), "FROM mine\n").unwrap();
        std::fs::remove_file(dir.join("toolbox.toml")).unwrap();
        assert!(!install_default(&dir).unwrap());
        assert_eq!(
            std::fs::read_to_string(dir.join("Containerfile")).unwrap(),
            "FROM mine\n"
        );
        assert!(
            !dir.join("toolbox.toml").exists(),
            "the user's folder is theirs"
        );
    }

    #[test]
    fn a_containerfile_is_refused_over_256_kib_or_without_from() {
        assert!(refuse(TOOLBOX_CONTAINERFILE).is_none());
        assert!(refuse("# base\n  from debian:trixie\nRUN true\n").is_none());
        let big = format!("FROM x\n{}", "#".repeat(MAX_CONTAINERFILE));
        let p = refuse(&big).unwrap().problem();
        assert_eq!(p.status, 413);
        assert!(p.detail.unwrap().starts_with("content:"));
        let p = refuse("RUN true\n").unwrap().problem();
        assert_eq!((p.status, p.title.as_str()), (400, "containerfile invalid"));
    }
}
