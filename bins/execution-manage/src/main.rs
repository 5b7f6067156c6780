fn main() {
    eprintln!("execution-manage: not implemented yet");
    std::process::exit(1);
}
