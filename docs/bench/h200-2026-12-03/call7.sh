#!/bin/bash
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/gpu_check.sh" run
bash "$here/xeon7.sh"
