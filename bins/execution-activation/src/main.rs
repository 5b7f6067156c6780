fn main() {
    eprintln!("execution-activation: not implemented yet");
    std::process::exit(1);
}
