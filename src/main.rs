fn main() -> std::process::ExitCode {
    distrun::cli::main()
}
