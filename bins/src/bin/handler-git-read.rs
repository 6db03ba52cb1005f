//! `handler-git-read`: the session files' git reader child (F.8), run by handlerd with a 1 GiB
//! memory limit and a 10 s timeout. Its logic is `handler_core::gitread`.

fn main() -> std::process::ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    handler_core::gitread::run(&args)
}
