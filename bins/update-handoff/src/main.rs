fn main() {
    eprintln!("update-handoff: not implemented yet");
    std::process::exit(1);
}
