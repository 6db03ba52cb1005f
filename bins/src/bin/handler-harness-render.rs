//! handler-harness-render: renders one harness launch (B.3) from a JSON request, for people
//! testing their own descriptors: `handler-harness-render --input FILE` prints the HarnessLaunch.

use anyhow::Context;
use clap::Parser;

/// Render a HarnessLaunch from a render request (RenderInput's fields and a `context`).
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The request: a JSON file (`-` for stdin).
    #[arg(long)]
    input: String,
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    let text = if args.input == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading stdin")?
    } else {
        std::fs::read_to_string(&args.input).with_context(|| format!("reading {}", args.input))?
    };
    print!("{}", handler_harness::render_json(&text)?);
    Ok(())
}
