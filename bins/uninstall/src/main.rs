fn main() {
    eprintln!("uninstall: not implemented yet");
    std::process::exit(1);
}
