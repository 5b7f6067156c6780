fn main() {
    eprintln!("update-runner: not implemented yet");
    std::process::exit(1);
}
