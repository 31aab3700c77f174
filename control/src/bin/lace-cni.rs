//! `lace-cni`: the CNI plugin binary kubelet (or Multus) runs. All of it is
//! [`lace_control::cni`]; this only sets the exit code.

fn main() {
    std::process::exit(lace_control::cni::run());
}
