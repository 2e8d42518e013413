"""Trains and/or evaluates a crackjax configuration (also installed as `crackjax-train`).

  python launch.py --config=configs/crackforest_exp.py --workdir=workdirs/cfd_exp
  python launch.py --config=configs/crackforest_exp.py:cpu --workdir=/tmp/cfd \
      --config.data.manual_dir=../shared/datasets/crackforest
  python launch.py --config=configs/crackforest_exp.py --workdir=workdirs/cfd_exp --mode=eval

The command lives in `crackjax.trainer.train_command` (`--help` lists its flags).
"""

from crackjax.trainer import train_command

if __name__ == '__main__':
  train_command.main('launch.py')
