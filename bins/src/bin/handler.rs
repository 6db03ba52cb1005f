//! `handler`: the command line client of handlerd (see `handler_bins::cli`).

fn main() {
    handler_bins::cli::main()
}
