//! Rebuilds handler-core when the web UI's built files change: `include_dir!` embeds
//! `web/dist/` (decision 0106), and stable Rust does not track the files a macro reads.

fn main() {
    println!("cargo:rerun-if-changed=web/dist");
    println!("cargo:rerun-if-changed=build.rs");
}
